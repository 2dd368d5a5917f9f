"""The storage server: validated, idempotent, durable writes of posts and reviews into the embedded SQLite store
or HBase (see docs/STORAGE.md). ``service.StorageService`` is the core; ``servant`` only adapts it to Ice."""
