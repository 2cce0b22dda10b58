"""Chapter 2: the PyTorch dispatcher."""
