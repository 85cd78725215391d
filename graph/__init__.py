"""The graph assembly: the nodes wired as the diagram in the README shows."""
