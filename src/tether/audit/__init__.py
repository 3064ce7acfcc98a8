"""tether.audit"""
