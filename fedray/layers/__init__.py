"""The layer stack between the loop and the clients: injected faults, the message log, privacy."""
