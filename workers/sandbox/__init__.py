"""The sandbox for model-written code and the environment of model-influenced processes.

- `environment`: the allow-listed environment (never the driver's) every such process
  starts from: worlds, graders and the code sandbox alike.
- `jail`: one check of a program in a fresh jail (namespaces, a private root, an
  unprivileged identity, resource limits, killed at its deadline); `launcher` builds
  the jail and `runner` runs the check inside it (both standard library only).
- `netns`: a command started in a network namespace of its own (no network).
- `values`: plain data across the boundary.

What it guarantees and what it does not: docs/sandbox.md.
"""
