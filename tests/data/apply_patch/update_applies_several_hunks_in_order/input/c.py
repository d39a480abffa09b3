DEFAULT_TIMEOUT = 30

def load_config():
    config = {}
    config["debug"] = False
    return config
