"""The change workflow: changes (review, commit, rollback), the active revision and its plan, crash
recovery, settling and drift. :mod:`changes` is the store side, :mod:`plans` a revision's plan (read,
solved with no session open, kept), :mod:`review` the dry-run document, :mod:`engine` the process that
talks to the devices, wiring one module per use case (:mod:`reviewer`, :mod:`commit` with :mod:`push`,
:mod:`recovery`, :mod:`settle`, :mod:`drift`, :mod:`autote`) over a shared :mod:`runtime`, and
:mod:`agents` where the devices are."""
