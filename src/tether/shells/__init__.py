"""tether.shells"""
