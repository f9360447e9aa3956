"""``python -m bench`` (``make bench``): every benchmark, then one table of the figures."""

from __future__ import annotations

from bench import cli, llm_client, pipeline_throughput, runtime_passthrough, stripe_client


def main() -> None:
    """Every benchmark on the running stack, then one table of the figures (about 13 min)."""
    print("LLM client: CPU per call, openai create vs the project's adapter (alternating runs)")
    rows = llm_client.main()
    print("Stripe client: CPU per refund, requests in threads vs aiohttp (alternating runs)")
    rows += stripe_client.main()
    print("pipeline: six stages end to end")
    rows += pipeline_throughput.main()
    # Last: on a broker the pipeline has warmed up (see the module's docstring).
    print("runtime: pass-through, exactly-once vs at-least-once (alternating runs)")
    rows += runtime_passthrough.main()
    width = max(len(name) for name, _ in rows)
    print()
    print(f"{'benchmark':{width}s}  value")
    print(f"{'-' * width}  -----")
    for name, value in rows:
        print(f"{name:{width}s}  {value}")


if __name__ == "__main__":
    cli.run(main)
