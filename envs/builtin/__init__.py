"""Built-in environments, written like PettingZoo's."""
