"""`python tests/mutation/run.py ARGS`: mutmut 2's command line, with one crash fixed.

mutmut 2.5 stops the whole run ("Attribute Mutant.line is required") when its cache has lost
the row of a mutant's line; every mutant after it goes untested. This records such a status
under a row made afresh instead (the status is the run's; only mutmut's bookkeeping was
missing), then hands over to mutmut's own `climain`.
"""

from __future__ import annotations

import sys

from mutmut import __main__ as mutmut_main
from mutmut import cache
from pony.orm import db_session


@cache.init_db
@db_session
def update_mutant_status(file_to_mutate, mutation_id, status, tests_hash) -> None:
    sourcefile = cache.get_or_create(cache.SourceFile, filename=file_to_mutate)
    line = cache.get_or_create(
        cache.Line,
        sourcefile=sourcefile,
        line=mutation_id.line,
        line_number=mutation_id.line_number,
    )
    mutant = cache.get_or_create(
        cache.Mutant, line=line, index=mutation_id.index, defaults={"status": status}
    )
    mutant.status = status
    mutant.tested_against_hash = tests_hash


if __name__ == "__main__":
    cache.update_mutant_status = update_mutant_status
    sys.exit(mutmut_main.climain())
