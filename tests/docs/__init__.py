"""The documentation's code runs and agrees with the code (README, docs/)."""
