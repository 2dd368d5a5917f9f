"""The scheduler server: durable task queues (pending / in-flight / done) under leases, revisit periods,
politeness and the account pool. ``core`` is plain Python over a ``store.QueueStore``; ``server`` adapts it
to Ice."""
