"""tether.jobs"""
