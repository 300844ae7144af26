"""Elastic training, framework-neutral: state.py (State, ObjectState and the run loop),
sync.py (the collective decision of whether to sync and from which rank) and worker.py (a
worker's side of the launcher's membership). Empty on purpose: init() imports the worker
without loading the state classes."""
