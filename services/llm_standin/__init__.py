"""A deterministic OpenAI-compatible stand-in for the three LLM roles (see README.md).

It answers by transparent rules so that the pipeline can be run and load-tested without a
model; it is not the product's judgement.
"""
