"""The shared kernel: what every app may import, and which imports no app of the project."""
