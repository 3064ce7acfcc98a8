"""tether.shells.guard"""
