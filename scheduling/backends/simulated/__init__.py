"""The simulated cluster backend: a Django app (label `simulated`) whose state lives in the
database, so the web process, the workers and the beat all see the same clusters."""
