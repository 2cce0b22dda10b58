"""Chapter 9: the capstone, one token of a Llama-3-8B-shaped model from eager Python to the speed of light."""
