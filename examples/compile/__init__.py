"""Chapter 4: torch.compile, Dynamo, AOTAutograd, Inductor and Triton."""
