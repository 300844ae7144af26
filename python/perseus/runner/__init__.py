"""perseusrun: starts one process per rank, locally, over ssh or through mpirun, hosts the
rendezvous store, and tears the whole job down when any rank fails; in elastic mode
(elastic/driver.py) the job goes on without failed workers and takes new ones in."""
