"""The pieces algorithms share: local solvers, the server step, DANE's options (correction,
safeguard, line search), learning-rate schedules, diagnostics, and the setting checks."""
