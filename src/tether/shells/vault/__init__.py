"""tether.shells.vault"""
