"""The collection types, one per module. See ``engine.dataflow.collection`` for the contract."""
