"""Pure metrics and rendering of results (terminal, Markdown, JSON)."""
