"""What every exercise of the course shares: the pytest plugin and test support, the secret
inputs, the reference computations, the mistakes catalogue's building blocks, figure inputs."""
