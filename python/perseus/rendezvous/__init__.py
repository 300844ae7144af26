"""What perseusrun and its ranks agree on: the topology variables a rank starts with
(topology.py) and the rendezvous-store keys of an elastic job (elastic.py). It imports nothing
else of perseus, so the launcher (perseus.runner) and the workers (perseus.common) both import
it."""
