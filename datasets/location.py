"""Where a store lives: a local path, or an fsspec URL (s3://, gs://, ...) that every worker
of a multi-machine cluster can reach.

Local paths are made absolute on the driver (workers started in another folder would resolve
a relative one elsewhere); `file://` URLs are local paths. Remote URLs go to zarr's own
fsspec store. Credentials and endpoints come from the usual environment and config of the
filesystem library (for S3: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL,
~/.aws/...), never from our flags, and never appear in our messages.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
from pathlib import Path
from typing import Any

_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+)://")
# pathlib turns `s3://b/x` into `s3:/b/x`: a URL that went through a Path on its way here.
_MANGLED_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]+:/[^/]")
# What each remote protocol needs installed (the `s3` extra installs s3fs).
FSSPEC_PACKAGES = {"s3": "s3fs", "s3a": "s3fs", "gs": "gcsfs", "gcs": "gcsfs", "az": "adlfs"}


def is_remote(location: str | os.PathLike) -> bool:
    """True for a URL other than file:// (a store the workers reach over the network)."""
    match = _URL.match(str(location))
    return bool(match) and match.group(1).lower() != "file"


def resolve(location: str | os.PathLike) -> str:
    """The store's location as the workers must be told it: an absolute local path, or the
    remote URL unchanged. ValueError for a URL whose filesystem is not installed."""
    text = str(location)
    if _MANGLED_URL.match(text) and not Path(text).exists():
        raise ValueError(f"{text} looks like a URL that lost a slash; write it as scheme://...")
    if text.lower().startswith("file://"):
        return str(Path(text[len("file://") :]).absolute())
    if not is_remote(text):
        return str(Path(text).absolute())
    filesystem(text)  # the protocol's package is installed
    return text


def filesystem(url: str) -> Any:
    """The fsspec filesystem of a remote URL, fresh (no listing cached from before)."""
    import fsspec

    protocol = _URL.match(url).group(1).lower()
    try:
        fs, _ = fsspec.url_to_fs(url, skip_instance_cache=True)
    except ImportError:
        package = FSSPEC_PACKAGES.get(protocol, f"the fsspec filesystem for {protocol}://")
        raise ValueError(
            f"{url}: reading {protocol}:// stores needs {package}; install it "
            "(pip install 'dask-dane[s3]' for S3)"
        ) from None
    except ValueError as err:  # fsspec: "Protocol not known"
        raise ValueError(f"{url}: {err}; pass a local path or an fsspec URL") from None
    return fs


def exists(location: str) -> bool:
    """Whether a store is at `location`; ValueError in one line where a remote one cannot be
    asked (no such bucket, access denied, endpoint unreachable)."""
    if not is_remote(location):
        return Path(location).exists()
    fs = filesystem(location)
    try:
        fs.info(location)
        return True
    except FileNotFoundError:
        _check_bucket(fs, location)
        return False
    except Exception as err:  # botocore, aiohttp and the OS raise many types
        raise ValueError(remote_problem(location, err)) from None


def _check_bucket(fs: Any, url: str) -> None:
    """ValueError if the bucket (the URL's first path part) is missing or not ours to read."""
    bucket = fs._strip_protocol(url).split("/", 1)[0]
    try:
        fs.ls(bucket)
    except FileNotFoundError:
        raise ValueError(
            f"{url}: the bucket {bucket!r} does not exist; create it or fix the URL"
        ) from None
    except Exception as err:
        raise ValueError(remote_problem(url, err)) from None


def remote_problem(url: str, err: BaseException) -> str:
    """One line saying why a remote store could not be used, and what to check."""
    if isinstance(err, PermissionError):
        return (
            f"{url}: access denied ({_first_line(err)}); check the credentials the "
            "filesystem library reads (for S3: AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, "
            "AWS_PROFILE or ~/.aws)"
        )
    return (
        f"{url}: cannot be reached ({type(err).__name__}: {_first_line(err)}); check the "
        "URL and the endpoint (for S3: AWS_ENDPOINT_URL)"
    )


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0][:160] if text else type(err).__name__


def remove(location: str) -> None:
    """Delete a store (a folder, or every object under a URL); what is not there is fine."""
    if not is_remote(location):
        shutil.rmtree(location, ignore_errors=True)
        return
    with contextlib.suppress(FileNotFoundError):
        filesystem(location).rm(location, recursive=True)
