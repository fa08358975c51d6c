"""The controller: observe → plan (pure) → act, one reconcile step at a time."""
