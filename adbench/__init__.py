"""ADBench GMM and BA objectives in accel, with I/O, runner and benchmarks."""
