"""Chapter 8: measuring GPU code."""
