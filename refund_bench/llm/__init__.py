"""LLM ports and adapters: the three roles' requests and answers, the OpenAI-compatible client,
the response cache and the shared rate limiter. Nothing here decides whether money moves."""
