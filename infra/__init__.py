"""The Punctual CDK app: stacks, constructs, settings and the layer build. Imports no runtime code."""
