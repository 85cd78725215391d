"""Where the memory lives: Postgres access below the memory and graph code."""
