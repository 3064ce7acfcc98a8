"""tether.mcp"""
