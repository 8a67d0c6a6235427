"""The Spark runtime: session builder, the CDC and snapshot data sources, streaming and population jobs."""
