"""Pure decision code. Installed as ``spotfleet.policies``; imports no provider and no store."""
