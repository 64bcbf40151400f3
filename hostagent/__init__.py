"""Host agent."""
