"""The plugin's Hydra config groups (entry point `distillery.conf`): benchmark/toy.yaml."""
