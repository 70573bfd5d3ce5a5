"""Word alignment: the reference links, the heads ranked against them, per sentence, and the CLI."""
