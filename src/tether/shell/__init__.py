"""tether.shell"""
