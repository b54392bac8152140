#pragma once

#define SPECDEMO_VERSION "@@VERSION@@"
