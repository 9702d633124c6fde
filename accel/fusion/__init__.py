"""Simplification and fusion: from the AST to the kernel program backends run."""
