"""Background services, one module per concern: `timers` (+ `wake`), `settled`, `lifecycle`
(outbox fan-out and delivery; `reader` is the handlers' read API), `shutdown`, `idle`,
`workers`, `jobs`, `notifications`, `purge`, `common`."""
