"""What perseusrun and its ranks agree on through the rendezvous store: elastic.py lists the
keys of an elastic job. It imports nothing else of perseus, so the launcher (perseus.runner)
and the workers (perseus.common) both import it."""
