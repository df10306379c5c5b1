"""Who is calling: credentials to a principal (docs/gateway.md, "Authentication")."""
