"""The engine: config, network, hook names and points, masks, vocabularies, typed results, decoding,
search, batching, branching and the loaded model. It imports nothing else of ``model/``."""
