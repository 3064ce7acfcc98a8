"""tether.process"""
