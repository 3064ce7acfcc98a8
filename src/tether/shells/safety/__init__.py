"""tether.shells.safety"""
