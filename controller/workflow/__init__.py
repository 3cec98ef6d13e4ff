"""The change workflow: changes (review, commit, rollback), the active revision and its plan, crash
recovery and drift. :mod:`changes` is the store side, :mod:`review` the dry-run document,
:mod:`engine` the process that talks to the devices, :mod:`agents` where they are."""
