"""tether.shells.tmux"""
