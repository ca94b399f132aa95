"""Layer 6, deployment: what is prepared once per installation (the drivers' class archive)."""
