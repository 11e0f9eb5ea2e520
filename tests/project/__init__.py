"""The project around the package: its structure rules, build, typing, benchmarks."""
