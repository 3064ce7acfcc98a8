"""tether.sessions"""
