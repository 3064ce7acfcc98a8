"""tether.shells.macros"""
