import os
import sys
import yaml

def main():
    pass
