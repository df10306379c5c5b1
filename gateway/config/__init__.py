"""Gateway configuration (`gateway.yaml`): model and loader."""
