"""The gateway role (seed 003): answer clients, forward each operation to its owner."""
