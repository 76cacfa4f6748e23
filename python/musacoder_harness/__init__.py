"""MusaCoder's executor harness: the trusted judge and the sandboxed candidate runner."""
